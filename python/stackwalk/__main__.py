import sys

from stackwalk.cli import main

sys.exit(main())
