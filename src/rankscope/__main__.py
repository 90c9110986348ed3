from rankscope.cli.node import main

if __name__ == "__main__":
    main()
