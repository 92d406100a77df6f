"""``python -m services.launcher`` — run the launcher service."""

import sys

from services.launcher.app import main

sys.exit(main())
