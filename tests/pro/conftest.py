import os
import sys

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pro"))
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
