"""``python -m services.alerter`` — run the alerter service."""

import sys

from services.alerter.app import main

sys.exit(main())
