"""What this machine offers: host compilers (`compiler`), system features from its GPUs (`features`)."""
