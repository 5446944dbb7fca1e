"""``python3 -m determined.launch.tensorflow``: det_sdk's ``det_sdk.launch.tensorflow``."""

import sys

from det_sdk.launch.tensorflow import main

if __name__ == "__main__":
    sys.exit(main())
