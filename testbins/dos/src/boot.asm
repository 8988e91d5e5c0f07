; boot.asm - an MBR boot sector (nasm -f bin) for `run --target qiling` (Qiling's MBR
; loader: 0000:7C00, DL = 0x80): recursion and calls through a pointer, each function
; counting its entries in calls_made; it prints "boot N" through int 21h AH=02h (Qiling's
; DOS layer serves it beside the BIOS services) and ends with int 21h AH=4Ch, status 0.
        [map symbols boot.nmap]
        bits 16
        org 0x7c00

calls_made equ 0x7e00           ; (a word of RAM after the sector, zero at power-on here)

start:  xor ax, ax
        mov ds, ax
        mov ax, 4
        call fact               ; fact(4): 4 entries
        mov bx, twice
        mov ax, 5
        call apply              ; apply(twice, 5): apply, twice twice
        call print_banner
        mov ax, [calls_made]
        add al, '0'             ; (7 calls: one digit)
        mov dl, al
        mov ah, 0x02
        int 0x21
        mov dl, 10
        int 0x21
        mov ax, 0x4c00
        int 0x21

; fact: AX = n, returns AX = n!
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

; print_banner: "boot " (not counted)
print_banner:
        mov ah, 0x02
        mov dl, 'b'
        int 0x21
        mov dl, 'o'
        int 0x21
        int 0x21
        mov dl, 't'
        int 0x21
        mov dl, ' '
        int 0x21
        ret

code_end:                       ; (where the code ends: the last function's extent in the map)
        times 510 - ($ - $$) db 0
        dw 0xaa55               ; the boot signature
