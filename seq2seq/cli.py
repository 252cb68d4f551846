"""The installed commands' entry points. Each imports its command only when run, so that the
worker processes a command starts (which import the main script again) stay light."""

from __future__ import annotations


def train() -> None:
    from seq2seq.train import main

    main()


def evaluate() -> None:
    from seq2seq.evaluate import main

    main()


def translate() -> None:
    from seq2seq.translate import main

    main()


def average() -> None:
    from seq2seq.average import main

    main()


def export() -> None:
    from seq2seq.export import main

    main()


def serve() -> None:
    from seq2seq.serve import main

    main()


def align() -> None:
    from seq2seq.align import main

    main()


def distill() -> None:
    from seq2seq.distill import main

    main()


def backtranslate() -> None:
    from seq2seq.backtranslate import main

    main()
