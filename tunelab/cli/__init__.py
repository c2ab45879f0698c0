"""The `tunelab` command line: commands, terminal output, and talking to a remote server."""
