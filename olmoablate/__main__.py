"""`python -m olmoablate` == the `olmoablate` console script."""

from olmoablate.cli import main

if __name__ == "__main__":
    main()
