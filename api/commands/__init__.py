"""One module per `napkin` subcommand."""
