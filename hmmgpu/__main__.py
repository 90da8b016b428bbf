"""``python -m hmmgpu``: the ``hmmgpu`` command line."""
import sys

from .cli import main

sys.exit(main())
