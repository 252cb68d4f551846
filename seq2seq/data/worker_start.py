"""Imported last by the server that forks tokenizer and encoding workers, never by the command's
own process: it imports what the workers run, and its settings reach only the server and them.

A worker runs ``python -m``'s module again as ``__mp_main__``; the server preloaded that module,
so Python would warn in each worker that it was already imported, which is what preloading is for.

Ctrl-C is the command's to say: held back while the server starts (`stream.worker_pool`), it then
ends the server or a worker without a word of its own (a terminal sends it to each of them, and
each printed its traceback); the command stops the rest.
"""

import warnings

import seq2seq.data.dataset
import seq2seq.data.tokenizer  # noqa: F401 (the workers' modules, imported once in the server)
from seq2seq.data.stream import end_quietly_on_ctrl_c

warnings.filterwarnings(
    "ignore", message=r".* found in sys\.modules after import of package", category=RuntimeWarning
)
end_quietly_on_ctrl_c()
