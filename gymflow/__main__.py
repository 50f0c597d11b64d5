from gymflow.cli import main

main()
