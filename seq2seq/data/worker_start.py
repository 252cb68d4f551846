"""Imported first by the server that forks tokenizer and encoding workers, never by the command's
own process: its setting reaches only those workers.

A worker runs ``python -m``'s module again as ``__mp_main__``; the server preloaded that module,
so Python would warn in each worker that it was already imported, which is what preloading is for.
"""

import warnings

warnings.filterwarnings(
    "ignore", message=r".* found in sys\.modules after import of package", category=RuntimeWarning
)
