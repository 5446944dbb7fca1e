"""``python3 -m determined.launch.wrap_rank``: det_sdk's ``det_sdk.launch.wrap_rank``."""

import sys

from det_sdk.launch.wrap_rank import main

if __name__ == "__main__":
    sys.exit(main())
