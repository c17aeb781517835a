"""`python -m reports ROOT --out DIR [options]`: the same as `rlsuite report`."""

import argparse

from rlsuite.reports.cli import add_arguments, main

raise SystemExit(main(add_arguments(argparse.ArgumentParser(prog="python -m reports")).parse_args()))
