"""``python -m hmmgpu``: the ``hmmgpu`` command line."""
import sys

from hmmgpu.cli import main

if __name__ == "__main__":
    sys.exit(main())
