"""``python3 -m determined.launch.horovod``: det_sdk's ``det_sdk.launch.horovod``."""

import sys

from det_sdk.launch.horovod import main

if __name__ == "__main__":
    sys.exit(main())
