from emutrace.cli.main import entry

entry()
