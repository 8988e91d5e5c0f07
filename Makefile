.PHONY: testbins

# Rebuild the committed test binaries (needs the Debian cross compilers).
testbins:
	$(MAKE) -C testbins
