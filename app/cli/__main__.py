"""`python -m qlshadow.cli`: the same command as the `qlshadow` console script."""
import sys

from qlshadow.cli import main

sys.exit(main())
