"""podctl's command line: thin, it parses, calls the library and renders."""
