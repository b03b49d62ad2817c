"""The one error type for bad user input.

A `ConfigError` names where the problem is (file and key, or flag) and what is
allowed. The CLI prints its message on one line and exits with status 2.
"""

from __future__ import annotations

EXIT_USAGE = 2


class ConfigError(ValueError):
    """Bad input from a user: a file, a key in it, or a command-line flag."""

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        file: str | None = None,
        allowed: tuple[str, ...] | None = None,
    ) -> None:
        self.message = message
        self.key = key
        self.file = file
        self.allowed = allowed  # for an unknown key: the keys accepted there (docs/reference.md)
        super().__init__(self.__str__())

    def with_file(self, file: str) -> ConfigError:
        """The same error, attributed to `file` (kept if one is already set)."""
        if self.file is not None:
            return self
        return ConfigError(self.message, key=self.key, file=file, allowed=self.allowed)

    def with_key_prefix(self, prefix: str) -> ConfigError:
        key = f"{prefix}.{self.key}" if self.key else prefix
        return ConfigError(self.message, key=key, file=self.file, allowed=self.allowed)

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.key:
            where.append(f"flag {self.key}" if self.key.startswith("-") else f"key '{self.key}'")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message
