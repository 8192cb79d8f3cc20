"""python3 -m fila.conformance core | client NAME ADDR | list"""

import sys

from . import main

sys.exit(main(sys.argv[1:]))
