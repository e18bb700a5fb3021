"""The exceptions of the zplan package.

Both extension modules raise ZplanError (the runtime with its status code, the compiler as CompileError), so
that a script can catch one class for everything zplan refuses. Mistakes in Python arguments (a wrong type,
an unknown keyword, an array of the wrong shape) are TypeError and ValueError as usual.
"""


class ZplanError(RuntimeError):
    """An error reported by the zplan runtime or compiler; ``code`` names the kind (e.g. "not_found")."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class CompileError(ZplanError):
    """zplan.compile() failed; the message is what the zplan command line prints for the same settings."""

    def __init__(self, message, log=""):
        super().__init__(message, "compile_error")
        self.log = log
