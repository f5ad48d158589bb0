"""Hard limits on what the front end accepts, so every input answers quickly.

Each limit, when passed, is a NapkinError (codes N05xx) rather than a slow run
or a RecursionError.
"""

MAX_SOURCE_BYTES = 1 << 20       # 1 MiB of diagram text
MAX_STATEMENTS = 10_000
MAX_DEPTH = 200                  # nesting of one expression (brackets, operators, calls)
MAX_NODES = 50_000               # graph IR nodes for the whole diagram
MAX_NAME_LENGTH = 128
MAX_RANK = 16                    # axes of one array
MAX_SIZE = 1 << 40               # a single axis size
MAX_INTEGER = (1 << 63) - 1      # an integer literal (integers are computed in 64 bits)
MAX_ERRORS = 50                  # diagnostics reported in one run
