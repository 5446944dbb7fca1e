"""``python3 -m determined.launch.torch_distributed``: det_sdk's launcher of that name."""

import sys

from det_sdk.launch.torch_distributed import main

if __name__ == "__main__":
    sys.exit(main())
