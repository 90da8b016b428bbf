"""``python -m hmmgpu.sw queries.fa db``: the ``hmmgpu sw`` command."""
import sys

from hmmgpu.sw.cli import main

sys.exit(main())
