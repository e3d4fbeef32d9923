//! Command-line interface: argument parsing and the commands' output.
