from lightning_embinit.commands.main import main

if __name__ == "__main__":
    raise SystemExit(main())
