from mediaindex.cli import main

main()
