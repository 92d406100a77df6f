"""``python -m services.scheduler`` — run the scheduler service."""

import sys

from services.scheduler.app import main

sys.exit(main())
