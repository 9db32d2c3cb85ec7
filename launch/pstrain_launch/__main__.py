"""python3 -m pstrain_launch ARGS: what launch/launch.sh runs after its setup."""
import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
