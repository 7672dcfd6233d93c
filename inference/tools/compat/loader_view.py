"""The base of the data loader views the compatibility layers wrap a case's loader in
(FlagPerf's ``DropPartialBatches``, ByteMLPerf's ``FirstBatches``)."""

from __future__ import annotations

from typing import Any


class LoaderView:
    """A view of ``loader``: its ``dataset``, and any other attribute the view does not set, are the loader's."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["loader"], name)
