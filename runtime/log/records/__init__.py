"""Records that live in the log: the typed records (one dataclass per schema), the status
vocabulary, epoch fencing, the prompt message sequence, out-of-line payloads and the run index."""
