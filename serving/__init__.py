"""Raw text served: Google's tokenizer and input packing as graph ops."""
