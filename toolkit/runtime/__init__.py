"""The only Python code (with toolkit.quantize) that touches the C library."""
