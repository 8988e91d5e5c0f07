; calls.com - a DOS .COM program (nasm -f bin) for `run --target qiling`: recursion and
; calls through a pointer, each function counting its own entries in `calls_made`, which
; the program prints at the end ("calls N") with int 21h AH=09h before it exits with
; int 21h AH=4Ch, status 0.  Its functions' addresses: the map nasm writes (calls.nmap),
; whose .text labels the Makefile lists as calls.map (nm form, for --symbols); the data is
; in .data, so that the map's .text holds code only.
        [map symbols calls.nmap]
        org 0x100
        section .text

start:  mov ax, 5
        call fact               ; fact(5): 5 entries
        mov bx, twice
        mov ax, 3
        call apply              ; apply(twice, 3): apply, twice twice
        call chain1             ; chain1 -> chain2 -> chain3
        mov dx, label
        mov ah, 0x09
        int 0x21
        mov ax, [calls_made]
        call print_number
        mov dx, newline
        mov ah, 0x09
        int 0x21
        mov ax, 0x4c00
        int 0x21

; fact: AX = n, returns AX = n! (16-bit, small n)
fact:   inc word [calls_made]
        cmp ax, 2
        jb .one
        push ax
        dec ax
        call fact
        pop cx
        mul cx
        ret
.one:   mov ax, 1
        ret

; twice: AX = 2 * AX
twice:  inc word [calls_made]
        shl ax, 1
        ret

; apply: BX = function, AX = x; returns f(f(x))
apply:  inc word [calls_made]
        call bx
        call bx
        ret

chain1: inc word [calls_made]
        call chain2
        ret
chain2: inc word [calls_made]
        call chain3
        ret
chain3: inc word [calls_made]
        ret

; print_number: AX in decimal through int 21h AH=02h (not counted: not one of the
; program's traced functions)
print_number:
        mov bx, 10
        xor cx, cx
.digit: xor dx, dx
        div bx
        push dx
        inc cx
        test ax, ax
        jnz .digit
.out:   pop dx
        add dl, '0'
        mov ah, 0x02
        int 0x21
        loop .out
        ret

code_end:                       ; (where the code ends: the last function's extent in the map)

        section .data
calls_made: dw 0
label:  db "calls $"
newline: db 13, 10, "$"
