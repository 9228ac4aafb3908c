import sys

from matpo_graph.cli import main

sys.exit(main())
