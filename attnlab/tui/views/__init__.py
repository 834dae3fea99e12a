"""The lab's tabs: Setup, Train, Inspect, Runs/Compare, Export."""
