"""Every diagnostic code napkin can emit, with a one-line title.

`docs/errors.md` documents each code with an example and a fix; a test checks
that the two lists agree and that every code has a fixture.
"""

CODES: dict[str, str] = {
    # syntax
    "N0101": "unexpected character",
    "N0102": "syntax error",
    "N0103": "statement ends too early",
    "N0104": "file is not UTF-8 text",
    # names and declarations
    "N0201": "undeclared axis",
    "N0202": "name defined twice",
    "N0203": "undefined name",
    "N0204": "unknown function",
    "N0205": "equation without its axes",
    "N0206": "reserved name",
    "N0207": "no outputs",
    "N0208": "misuse of a name",
    "N0209": "unknown axis in a size override",
    # axes, shapes and sizes
    "N0301": "axis vanishes without a reduction",
    "N0302": "wrong number of axes",
    "N0303": "conflicting sizes for one axis",
    "N0304": "invalid size",
    "N0305": "size of an axis cannot be determined",
    "N0306": "axis repeated",
    "N0307": "reduction over an axis its argument does not have",
    "N0308": "input shape does not match the diagram",
    "N0309": "missing or unexpected input",
    "N0310": "too large for this machine's memory",
    # types
    "N0401": "unknown dtype",
    "N0402": "boolean where a number is needed",
    "N0403": "number where a boolean is needed",
    "N0404": "wrong number of arguments",
    "N0405": "array has the wrong dtype",
    "N0406": "floating-point value where an integer is needed",
    "N0407": "gathered position out of range",
    "N0408": "quotient of sizes in a position is no integer",
    # limits
    "N0501": "file too large",
    "N0502": "expression nested too deeply",
    "N0503": "diagram too large",
    "N0504": "name too long",
    "N0505": "number out of range",
    "N0506": "too many axes",
    # schedule hints and plans
    "N0601": "conflicting schedule hints",
    "N0602": "unknown memory level",
    "N0603": "plan does not fit in memory",
    "N0604": "schedule not legal for this diagram",
    "N0605": "unknown target",
    "N0606": "kernel cannot run on tensor cores",
    "N0607": "axis cannot be split",
    "N0608": "planning data does not fit the diagram",
    # warnings
    "N0701": "unused input",
    "N0702": "unused array",
    "N0703": "array broadcast along an axis it does not depend on",
    "N0704": "one contraction across a function",
    "N0705": "shared axis kept through a product and normalised per position",
    # command line and files
    "N0801": "no such diagram",
    "N0802": "unsupported architecture",
    "N0803": "compiler option not allowed",
    "N0804": "malformed option value",
    "N0805": "missing sizes for random inputs",
    "N0806": "unreadable or mismatched inputs file",
    "N0807": "cannot write output file",
    "N0808": "unknown backend",
    "N0810": "no gradient for this input",
    "N0811": "output file is one of the command's inputs",
    # backends and runtime
    "N0901": "backend unavailable",
    "N0902": "emulated kernel failed",
    "N0903": "kernel argument does not match its signature",
}


def title(code: str) -> str:
    return CODES[code]
