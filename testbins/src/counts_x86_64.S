/* counts: the smallest program with a known call graph, for the exact per-mechanism counts
 * in tests/test_counts.py (which derives every number from this listing).
 *
 *   _start -> main -> leaf
 *                  -> mid -> leaf
 *
 * 16 instructions run: _start 1 (call) + main 6 + mid 4 + leaf 1 twice + _start 3 (exit).
 * First instructions: _start and the leaf begin with a call / ret, main and mid with push
 * (an ordinary instruction an entry probe displaces).  exit status: 0.
 */
        .text
        .globl  _start
        .type   _start, @function
_start:
        call    main            # site: call
        mov     %eax, %edi
        mov     $60, %eax       # exit
        syscall
        .size   _start, .-_start

        .globl  main
        .type   main, @function
main:
        push    %rbx
        call    leaf            # site: call
        call    mid             # site: call
        pop     %rbx
        xor     %eax, %eax
        ret                     # site: return
        .size   main, .-main

        .globl  mid
        .type   mid, @function
mid:
        push    %rbx
        call    leaf            # site: call
        pop     %rbx
        ret                     # site: return
        .size   mid, .-mid

        .globl  leaf
        .type   leaf, @function
leaf:
        ret                     # site: return
        .size   leaf, .-leaf
        .section .note.GNU-stack,"",@progbits
