"""Generation backends behind ``core.protocol.GenerationBackend``: Hugging Face ``generate`` (``hf``), vLLM
(``vllm``) and the CoMLRL generation-hook adapter (``hook``)."""
