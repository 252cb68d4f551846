"""Every corpus reader behind one interface: a split name in, a stream of pairs out.

``READERS`` maps the ``data`` group's options to their readers: Multi30k and custom files (two
files per split), a tab-separated file, a Hugging Face dataset. The last two may carve their
validation and test splits out of the training data (``seq2seq.data.carve``).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from seq2seq.config import Multi30kConfig
from seq2seq.data.carve import Carved, carve
from seq2seq.data.corpus import check_splits, file_stream, prepared_by, split_files, split_name
from seq2seq.data.hf import hf_stream, load_splits
from seq2seq.data.stream import PairStream, file_digest, limited
from seq2seq.data.tsv import column_indices, tsv_stream
from seq2seq.errors import DataError, relative_note, require_file

SPLITS = ("train", "valid", "test")
MULTI30K_LICENCE = (
    'Multi30k (Elliott et al., 2016, "Multi30K: Multilingual English-German Image '
    'Descriptions") is derived from Flickr30K and is for non-commercial research and '
    "educational use; a model trained on it inherits that condition."
)
OTHER_LICENCE = (
    "Trained on {data}: the licence of that data, and any condition it sets on models derived "
    "from it, applies (Tatoeba exports, for instance, are CC-BY 2.0 France)."
)


def data_kind(cfg: Any) -> str:
    """The reader of a data config (``kind``; run folders of older versions say ``name``)."""
    kind = cfg.get("kind") if hasattr(cfg, "get") else getattr(cfg, "kind", None)
    return kind or cfg.name


class Reader:
    """What every corpus's reader tells about it beyond its pairs."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def describe(self) -> str:
        raise NotImplementedError

    def licence(self) -> str:
        """The condition a model trained on this data inherits, as its model card states it."""
        return OTHER_LICENCE.format(data=self.describe())

    def portable(self) -> Any:
        """A copy of the data config fit for another machine (a release's config.yaml)."""
        return self.cfg.copy()


class FileReader(Reader):
    """Two files per split, ``<prefix>.<lang>`` (Multi30k's are read so too: `Multi30kReader`)."""

    def check(self) -> None:
        check_splits(self.cfg)

    def has(self, split: str) -> bool:
        return split_name(self.cfg, split) is not None

    def stream(self, split: str, limit: int | None = None) -> PairStream:
        """The pairs of ``split`` (the first ``limit``; both files are validated whole)."""
        return file_stream(*split_files(self.cfg, split), limit)

    def describe(self) -> str:
        return f"custom ({self.cfg.train})"


class Multi30kReader(FileReader):
    """Multi30k's two files per split, downloaded from ``data.source``."""

    def describe(self) -> str:
        return "Multi30k task 1"

    def licence(self) -> str:
        return MULTI30K_LICENCE

    def portable(self) -> Any:
        """Where the corpus lay on the training machine is dropped: the defaults' download."""
        cfg, defaults = self.cfg.copy(), Multi30kConfig()
        cfg.source, cfg.root, cfg.cache_dir = defaults.source, defaults.root, defaults.cache_dir
        return cfg


class CarvingReader(Reader):
    """One training stream; validation and test are streams of their own or carved out of it."""

    def whole(self) -> PairStream:
        """The training data before carving."""
        raise NotImplementedError

    def own(self, split: str) -> PairStream:
        """A validation or test split given apart from the training data."""
        raise NotImplementedError

    def has(self, split: str) -> bool:
        return split != "test" or self.cfg.test is not None or self.cfg.test_size > 0

    @cached_property
    def carved(self) -> Carved | None:
        sizes = {
            s: getattr(self.cfg, f"{s}_size")
            for s in ("valid", "test")
            if getattr(self.cfg, s) is None
        }
        sizes = {s: sizes.get(s, 0) for s in ("valid", "test")}
        if not any(sizes.values()):
            return None
        return carve(self.whole(), sizes, self.cfg.split_seed, Path(self.cfg.cache_dir))

    def stream(self, split: str, limit: int | None = None) -> PairStream:
        """The pairs of ``split`` (the first ``limit``): training without the carved pairs."""
        if split == "train":
            whole = self.whole()
            train = (
                whole if self.carved is None else self.carved.training(whole, self.cfg.split_seed)
            )
            return limited(train, limit)
        if split not in ("valid", "test"):
            return limited(self.own(split), limit)
        if not self.has(split):
            raise DataError(f"no {split} split configured (set data.{split} or data.{split}_size)")
        own = getattr(self.cfg, split) is not None
        return limited(self.own(split) if own else self.carved.stream(split), limit)


class TsvReader(CarvingReader):
    """A tab-separated file; ``data.valid``/``data.test`` are files of their own, or carved."""

    def check(self) -> None:
        column_indices(self.cfg.columns, self.cfg.src_lang, self.cfg.tgt_lang, self.cfg.file)
        for key in ("file", "valid", "test"):
            if (path := getattr(self.cfg, key)) is None:
                continue
            try:  # often a recipe's relative path: said with where it looked, how to make it
                require_file(path, f"data.{key}")
            except DataError as e:
                raise DataError(f"{e}{relative_note(path)}{prepared_by(self.cfg, path)}") from None
        if self.cfg.sha256 and file_digest(Path(self.cfg.file)) != self.cfg.sha256.lower():
            raise DataError(
                f"{self.cfg.file} is not the file data.sha256 names (SHA-256 "
                f"{file_digest(Path(self.cfg.file))}, expected {self.cfg.sha256}): its splits and "
                "scores would differ from the recipe's; set data.sha256=null to use it anyway"
            )

    def _tsv(self, path: str) -> PairStream:
        cfg = self.cfg
        return tsv_stream(Path(path), cfg.columns, cfg.src_lang, cfg.tgt_lang)

    def whole(self) -> PairStream:
        return self._tsv(self.cfg.file)

    def own(self, split: str) -> PairStream:
        path = getattr(self.cfg, split, None)
        if path is None:
            raise DataError(f"a tab-separated corpus has splits train, valid and test, not {split}")
        return self._tsv(path)

    def describe(self) -> str:
        return f"tab-separated ({Path(self.cfg.file).name})"


class HfReader(CarvingReader):
    """A Hugging Face dataset; ``data.valid``/``data.test`` are its split names, or carved."""

    def check(self) -> None:
        splits = load_splits(self.cfg.path, self.cfg.name)
        for split in ("train", "valid", "test"):
            name = getattr(self.cfg, split)
            if name is not None and name not in splits:
                raise DataError(
                    f"{self.cfg.path} has no split {name!r} (data.{split}); it has: "
                    f"{', '.join(splits)}; data.{split}=null carves it out of the training split"
                    if split != "train"
                    else f"{self.cfg.path} has no split {name!r} "
                    f"(data.train); it has: {', '.join(splits)}"
                )
            if name is not None:
                hf_stream(self.cfg, name)  # its columns: named, and of text

    def whole(self) -> PairStream:
        return hf_stream(self.cfg, self.cfg.train)

    def own(self, split: str) -> PairStream:
        return hf_stream(self.cfg, getattr(self.cfg, split, None) or split)

    def describe(self) -> str:
        name = f" {self.cfg.name}" if self.cfg.name else ""
        return f"Hugging Face dataset {self.cfg.path}{name}"


READERS: dict[str, type] = {
    "multi30k": Multi30kReader,
    "custom": FileReader,
    "tsv": TsvReader,
    "hf": HfReader,
}


def open_reader(cfg: Any) -> Reader:
    """The reader of a data config."""
    kind = data_kind(cfg)
    if kind not in READERS:
        raise DataError(f"unknown data kind {kind!r}; known: {', '.join(READERS)}")
    return READERS[kind](cfg)
