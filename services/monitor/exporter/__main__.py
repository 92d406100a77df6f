"""``python -m services.monitor.exporter`` — run a node's GPU exporter."""

import sys

from services.monitor.exporter.app import main

sys.exit(main())
