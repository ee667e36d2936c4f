from stackwalk.cli import run

run()
