"""Tools: ``@tool`` schemas and validation, execution (journal, timeouts, events), history."""
