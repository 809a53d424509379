"""What a config may say and what it resolves to: names, types, values and the settings that
change the math, all checked before torch is imported, so a mistake is answered at once."""
