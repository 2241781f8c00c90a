"""The user-error type every layer raises (stdlib only, so anything may import it without cycles)."""


class ConfigError(ValueError):
    """A bad configuration value or input; the message is one line naming the key or file and the fix."""


class TrialDirError(ValueError):
    """A trial directory that cannot be trusted as it is (one line naming the file and the way out)."""


_CAUSES = {"ENOSPC": "no space left on the device; free some space or write elsewhere",
           "EDQUOT": "the disk quota is exceeded; free some space or write elsewhere",
           "EROFS": "a read-only file system; write elsewhere (--results, --out)",
           "EACCES": "permission denied; write somewhere you may (--results, --out) or fix the permissions",
           "EPERM": "operation not permitted; write somewhere you may (--results, --out) or fix the permissions",
           "ENAMETOOLONG": "the name is too long for the file system; use a shorter path",
           "EMFILE": "too many open files; raise the limit (ulimit -n) and run it again",
           "ELOOP": "a symbolic link where stalebench writes a file; remove the link or write elsewhere"}


def os_error_line(exc: OSError) -> str:
    """One line for a file-system error at the command line's boundary: the path and the cause in words
    (a full disk, a read-only folder, ...), e.g. "out/index.html: no space left on the device; ..."."""
    import errno

    name = errno.errorcode.get(exc.errno or 0, "")
    cause = _CAUSES.get(name) or f"{exc.strerror or type(exc).__name__}"
    where = exc.filename if exc.filename is not None else ""
    return f"{where}: {cause}" if where != "" else cause
