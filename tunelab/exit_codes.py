"""The exit codes of tunelab's commands, apart from the code that prints runs, so that
importing them costs nothing: 0 completed, 1 error, 2 bad input, 130 stopped."""

EXIT_OK, EXIT_ERROR, EXIT_BAD_CONFIG, EXIT_STOPPED = 0, 1, 2, 130
