"""The Textual console. Reads snapshots; never talks to the network itself."""
