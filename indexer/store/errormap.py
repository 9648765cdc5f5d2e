"""How a backend turns its driver's errors into one `StoreError`: every public method of the
store class is wrapped by the backend's own mapper (which errors, and how they are worded, are
the backend's; walking the class is shared)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any, TypeVar

ClassT = TypeVar("ClassT", bound=type)


def wrap_public_methods(
    cls: ClassT, wrap: Callable[[Callable[..., Any]], Callable[..., Any]], *, skip: Collection[str]
) -> ClassT:
    """Replace each public plain method of `cls`, its own or inherited from a shared base (not
    those in `skip`: context managers map their own statements, since a wrapper around the call
    would not see what runs on entering). The wrapped copies are set on `cls`: a base shared by
    several backends keeps its plain methods, each backend maps them its own way."""
    seen: set[str] = set()
    for klass in cls.__mro__[:-1]:  # not `object`
        for name, member in list(vars(klass).items()):
            if name in seen:
                continue
            seen.add(name)
            if name.startswith("_") or name in skip or not inspect.isfunction(member):
                continue
            setattr(cls, name, wrap(member))
    return cls
