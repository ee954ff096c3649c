import sys

from tailor.cli import main

sys.exit(main())
