"""The Hydra configs as a package (``pkg://seq2seq.configs``). Importing it registers the typed
schemas in Hydra's ConfigStore, so the compose API finds every group without importing the app."""

import seq2seq.commands.configs  # noqa: F401  (registers the other commands' schemas)
import seq2seq.config  # noqa: F401  (registers the training schema and the group options)
