"""hmmgpu's SELEX reader (hmmgpu.formats.selex) against Easel's, through pyhmmer: on files small
enough for pyhmmer's reader (it fails above about 4 MB, which is why hmmgpu reads SELEX
itself), the same sequences, names and residues, or both refuse the file."""
import random

import pyhmmer
import pytest

from hmmgpu.errors import InputError
from hmmgpu.formats.selex import selex_to_fasta
from hmmgpu.formats.seqdb import SequenceDB

AMINO = pyhmmer.easel.Alphabet.amino()


def easel(path):
    """Easel's sequences of a SELEX file (names, digital residues), or None where it refuses it."""
    try:
        with pyhmmer.easel.SequenceFile(str(path), format="selex", digital=True, alphabet=AMINO) as fh:
            return [(s.name, bytes(s.sequence)) for s in fh.read_block()]
    except (ValueError, RuntimeError, OSError, EOFError, SystemError):
        return None


def ours(path):
    """hmmgpu's sequences of a SELEX file, read as a search reads its targets (both readers of
    the FASTA text it becomes: Easel's, and with ``arrays`` the GPU process's), or None where it
    refuses the file."""
    read = []
    for arrays in (False, True):
        try:
            db = SequenceDB.from_file(path, "selex", arrays=arrays)
        except InputError:
            read.append(None)
            continue
        read.append([(db.name(i).decode(), bytes(db.codes(i))) for i in range(len(db.lengths))])
    assert read[0] == read[1]
    return read[0]


def random_selex(rng) -> bytes:
    """A SELEX file drawn from ``rng``: blocks of sequence lines (spaces, '.', '-', '_' and '~'
    as gaps, lower case, rare residues), #=RF/#=CS/#=SS/#=SA annotation, comments, CRLF, and
    now and then a fault (a line too many, an orphan #=SS, a stray character, a renamed line)."""
    nseq, nblocks = rng.randint(1, 6), rng.randint(1, 4)
    names = [(rng.choice(["s", "seq_long_name", "#=GSx", "n"]) + str(i)).encode() for i in range(nseq)]
    residues = b"ACDEFGHIKLMNPQRSTVWYacdefghikBJZOUXx*"
    consistent = rng.random() < 0.8
    rf, cs = rng.random() < 0.3, rng.random() < 0.2
    with_ss = {i for i in range(nseq) if rng.random() < 0.2}
    out = [b"# a comment"] if rng.random() < 0.3 else []
    for _ in range(nblocks):
        if rf if consistent else rng.random() < 0.3:
            out.append(b"#=RF xxxxxxxxxx")
        if cs if consistent else rng.random() < 0.2:
            out.append(b"#=CS >>..<<")
        for i, name in enumerate(names):
            body = bytes(rng.choice(residues) if rng.random() < 0.7 else rng.choice(b"-._~ ")
                         for _ in range(rng.randint(0, 30)))
            if rng.random() < 0.01:
                body += rng.choice([b"\t", b"1", b"!", b"\r", b"#"])
            if rng.random() < 0.02:
                name = b"other"
            out.append(name + (b" " * rng.randint(1, 8) if rng.random() < 0.7 else b"\t") + body)
            if i in with_ss if consistent else rng.random() < 0.03:
                out.append(b"#=SS HHHH")
            if rng.random() < 0.03:
                out.append(b"# a comment inside")
        if rng.random() < 0.01:
            out.append(b"extra_line ACD")
        out.append(b"" if rng.random() < 0.8 else b"  \t ")
    if rng.random() < 0.05:
        out.insert(rng.randrange(len(out)), rng.choice([b"#=SS orphan", b"#=RF second"]))
    end = b"\r\n" if rng.random() < 0.2 else b"\n"
    return end.join(out) + end


def test_random_files_read_as_easel_reads_them(tmp_path):
    path = tmp_path / "f.selex"
    read = refused = 0
    for seed in range(400):
        data = random_selex(random.Random(seed))
        path.write_bytes(data)
        theirs = easel(path)
        assert ours(path) == theirs, (seed, data[:300])
        read += theirs is not None
        refused += theirs is None
    assert read > 100 and refused > 100   # both kinds well represented


@pytest.mark.parametrize("text,expected", [
    # spaces are gaps and may overlap a longer name (Easel's own example); '~' is missing data
    (b"seq1_longname ACCCGGT\nseq2      AAAAACCCGGTT\n", [("seq1_longname", "ACCCGGT"), ("seq2", "AAAAACCCGGTT")]),
    (b"# comment\n#=RF xxxx\ns1 AC.D-E_F~G\n#=SS HHHH\ns2 ac  df\n\n#=RF xx\ns1 KL\n#=SS HH\ns2 M\n",
     [("s1", "ACDEFGKL"), ("s2", "ACDFM")]),
    (b"s1 ACD\r\ns2 EF  \r\n\r\ns1 GH\r\ns2\r\n", [("s1", "ACDGH"), ("s2", "EF")]),
])
def test_examples(tmp_path, text, expected):
    (tmp_path / "f.selex").write_bytes(text)
    got = ours(tmp_path / "f.selex")
    assert [(name, bytes(AMINO.encode(seq))) for name, seq in expected] == got
    assert easel(tmp_path / "f.selex") == got


@pytest.mark.parametrize("text,said", [
    (b"s1 ACD\ns2 EF\n\ns1 GH\n", "expected 2 lines in block, saw 1"),
    (b"s1 ACD\ns2 EF\n\ns2 GH\ns1 K\n", "expected sequence s1 at this line of block"),
    (b"#=SS HH\ns1 ACD\n", "#=SS must follow a sequence"),
    (b"#=RF xx\n#=RF yy\ns1 ACD\n", "too many #=RF lines for block"),
    (b"s1 AC1D\n", "illegal residue(s) in sequence line"),
    (b"s1 ACD\ns2 \r\r\n", "only white space other than spaces and tabs after the name"),
    (b"\n# only a comment\n", "contains no sequences"),
])
def test_faults_are_one_line_errors(tmp_path, text, said):
    with pytest.raises(InputError, match=r"^f\.selex: .*" + said.replace("(", r"\(").replace(")", r"\)")):
        selex_to_fasta(text, "f.selex")
    (tmp_path / "f.selex").write_bytes(text)
    assert not easel(tmp_path / "f.selex")   # refused, or (the last case) no sequence, which hmmgpu refuses in any format
