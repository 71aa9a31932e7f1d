from podctl.cli.main import main

main()
