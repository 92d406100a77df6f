"""``python -m services.monitor`` — run the monitor service."""

import sys

from services.monitor.app import main

sys.exit(main())
