"""The dataset preview child: reads a few rows of a dataset (text, images, audio) for the page."""
