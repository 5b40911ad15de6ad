"""The program controller: an OpenAI-compatible service that schedules by program."""
