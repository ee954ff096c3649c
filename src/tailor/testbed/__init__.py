"""The testbed: measure the real PLT tensor (nginx + curl through tailor-link namespaces). See docs/testbed.md."""
